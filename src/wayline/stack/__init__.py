"""The local stack: a Kafka broker, a PostgreSQL server and the SparkSession, for the CLI and tests."""
