"""Delivery storage: what the delivery core records in PostgreSQL, and the tables it uses.

- ``store``        the delivery log, the retry store, the attempt log and the dead-letter tables;
                   ``PostgresDeliveryStore``, the stage's store
- ``drain``        the retry path: claim due retries, attempt, settle, bury the dead, find failing endpoints
- ``attempt_log``  every attempt, as the customer lists it
- ``dead_letter``  dead letters as the customer uses them: poll, acknowledge, replay; test events
"""
