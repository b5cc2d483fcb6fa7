"""rtts: real-time text-to-speech over WebSocket for small CPU machines."""

__version__ = "0.1.0"
