"""Serves a tiny random-weight pipeline as a local hub, to try the image API offline.

`./scripts/serve --demo` runs it and the service pointed at it in one command. Alone, it
prints the variables to start a service (or the processes of docs/distributed.md) with:

.venv/bin/python scripts/demo_hub.py
"""

import argparse
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.local_hub import LocalHub  # noqa: E402
from tests.support.tiny_model import build_tiny_pipeline  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--layout", choices=["sd", "sdxl"], default="sd")
    parser.add_argument(
        "--root", type=Path, help="build the model here (left for the caller to remove)"
    )
    args = parser.parse_args()
    with ExitStack() as stack:
        root = args.root or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        repo = f"demo/tiny-{args.layout}"
        build_tiny_pipeline(root / repo, layout=args.layout)
        with LocalHub(root) as hub:
            print(f"hub serving {repo}; start the service with:\n")
            print(f"  HF_ENDPOINT={hub.url} MODEL_ID={repo} ./scripts/serve\n", flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass


if __name__ == "__main__":
    main()
