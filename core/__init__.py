"""The shared kernel. It imports no app and no configuration, so every layer may use it."""
