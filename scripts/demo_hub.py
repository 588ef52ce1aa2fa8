"""Serves a tiny random-weight pipeline as a local hub, to try the image API offline.

.venv/bin/python scripts/demo_hub.py            # prints the variables to start the service with
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.local_hub import LocalHub  # noqa: E402
from tests.support.tiny_model import build_tiny_pipeline  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", choices=["sd", "sdxl"], default="sd")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        repo = f"demo/tiny-{args.layout}"
        build_tiny_pipeline(Path(root) / repo, layout=args.layout)
        with LocalHub(Path(root)) as hub:
            print(f"hub serving {repo}; start the service with:\n")
            print(f"  HF_ENDPOINT={hub.url} MODEL_ID={repo} ./scripts/serve\n", flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass


if __name__ == "__main__":
    main()
