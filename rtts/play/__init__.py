"""rtts play: a headless player that hears channels of an rtts server and plays each
announcement through the box's audio output in step with every other player and kiosk
(docs/protocol.md, "Playing in step"; docs/edge.md).

Layers, each importing only those below it:

- ``timeline`` (pure): announcements placed on the shared clock, read out block by block.
- ``steering`` (pure): keeps the output's read position on that timeline, a sample at a time.
- ``outputs``: where the samples go: a sound device (PortAudio, by ``sounddevice``) or a
  file or FIFO paced in real time (a Snapcast pipe source).
- ``listener``: the WebSocket side (subscribe, clock exchange, reconnect).
- ``settings`` and ``main``: the one configuration file, and ``rtts play``.

Nothing here imports the server's modules but ``protocol``, ``tokens`` and
``broadcast.clock``."""
