"""The shared kernel every app builds on: errors, env parsing, request context, logs, text,
timestamps, uploads. It imports no app and no configuration, so every layer may use it."""
