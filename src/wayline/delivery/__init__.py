"""Delivery: from matched events to signed HTTP requests, and what happens after each attempt.

One module per concept, pure Python, no Spark (the Spark jobs in ``wayline.pipelines``
call these on groups and Arrow batches):

- ``signing``      Standard Webhooks headers, ``whsec_`` secrets, stable webhook ids
- ``batch``        count-or-time batching per subscription shard; the CloudEvents batch body
- ``bucket``       many batch keys' pending items as one state value, with a replay guard
- ``retry``        outcome classification and the retry schedule (``next_attempt_at``)
- ``attempt``      one frozen type per delivery state; ``settle`` moves between them
- ``circuit``      per-endpoint circuit breakers
- ``transports``   the transport interface and its request/result values and settings; the pyreqwest
                   (default), aiohttp and in-memory transports; ``transport_for``, which picks one
- ``dispatch``     a group of sends under one deadline, with per-endpoint limits
- ``memory``       an in-memory delivery store, for tests (with ``transports.memory``)
- ``audit``        the self-audit's consumed and outcome records
- ``auth``         Basic, Bearer and OAuth2 client-credentials headers
- ``targets``      an endpoint as a sending task needs it (picklable, auth bound per task)
- ``stage``        one task's deliveries under one deadline: skip settled, send, settle, record
- ``storage``      what the core records in PostgreSQL (store, drain, attempt log, dead letters)
- ``operations``   Wayline's own CloudEvents (endpoint disabled, message dead-lettered) onto Kafka
- ``outcomes``     tallies per endpoint and subscription, and the micro-batch summary
- ``metrics``      the Prometheus view of the summaries
- ``holder``       the registry snapshot in use, swapped when the registry version moves, and
                   other values the driver re-reads now and then (the failing endpoints)
- ``open_batches`` batch-mode events gathered in a sender process's memory, pinning their offsets
- ``work``         the work topic's record: a request from the matching query to a sender process
- ``routing_table`` the registry snapshot as the JVM routes with it, published in a folder per version
- ``runtime``      what sends outside Spark: the send step, the worker pool, the sender processes

Only ``transports.pyreqwest`` and ``transports.aiohttp`` import an HTTP client; ``metrics`` renders
the totals with prometheus-client (``wayline.core.metrics`` serves them); ``storage``
talks to PostgreSQL, ``operations`` to Kafka, ``runtime`` to all three. Everything else loads none of them
(``tests/test_imports.py`` checks it), and this package re-exports nothing: import
the module that defines a name.
"""
