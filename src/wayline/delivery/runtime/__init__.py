"""The delivery runtime: what sends, outside Spark's plan, with the world at its edges.

- ``worker``            a process's long-lived HTTP transport, database pool and Kafka producer
- ``send_step``         a batch of work → one delivery stage and its Kafka records → counts
- ``work_rows``         work as Arrow rows, as the Spark sending tasks get it
- ``senders``           the sender processes of ``delivery.engine = "senders"``: a consumer
                        group on the work topic, open batches in memory, commits after outcomes
- ``intake``            the intake processes: many source topics copied onto one intake topic
- ``processes``         starting and stopping those processes beside ``wayline run delivery``
- ``retries``           ``wayline run retries``: the retry store drained, the dead buried,
                        endpoints failing too long disabled, old history expired
- ``registry_changes``  the registry changes delivery makes on its own (410 Gone)

A Spark sending task (``wayline.pipelines.sending``), a sender process and the retry
drain run the same send pieces; nothing here imports Spark. Unlike the delivery core,
these modules load Kafka, PostgreSQL and HTTP clients.
"""
