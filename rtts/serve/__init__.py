"""The transports: everything that holds a socket or speaks HTTP.

``server`` (WebSocket, drain and shutdown) with ``plain_http`` (every other request on the
port), ``openai_routes``/``openai_api`` (the OpenAI speech API), ``captioned_api``
(Kokoro-FastAPI's captioned route), ``announce_http`` (``POST /v1/announce``),
``wyoming_server`` (Home Assistant); ``connection`` drives one session and carries out
its effects, ``runner`` and ``speech_stream`` do so for clients that are not WebSockets;
``access`` (Origin, caps), ``outbox`` (bounded sends), ``sdnotify`` (systemd).

May import every layer below: ``service``, ``speech``, ``config``, ``broadcast`` and down.
"""
