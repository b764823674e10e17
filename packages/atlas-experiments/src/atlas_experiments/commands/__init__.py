"""One module per `atlas` command group; each exposes `register(subparsers)`."""
