"""The messaging API's logic: publish checks, the process's producers, transactions, cursors,
polls, topic admin and per-key topic grants. Plain Python over confluent-kafka; the FastAPI
service is `wayline.api.messaging`."""
