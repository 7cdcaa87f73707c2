"""HTTP transports: one interface, one module per implementation, and the one place that picks.

- ``base``       the interface (``Transport``), its request and result values, and ``HttpSettings``
- ``pyreqwest``  the pyreqwest transport (the default)
- ``aiohttp``    the aiohttp transport
- ``memory``     an in-memory transport, for tests
- ``factory``    ``transport_for``: a factory of the transport ``delivery.http_client`` names

Each implementation imports only ``base`` from Wayline's delivery code, and only
``factory`` knows the implementations; it imports the one asked for, so a process loads
one HTTP library (``tests/test_imports.py`` checks both). This package re-exports nothing.
"""
