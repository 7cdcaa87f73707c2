# The two commands a newcomer needs: `make demo` and `make test` (see README.md).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
MVN := mvn -q -B -s .mvn/settings.xml

CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install jars bench-flink demo test test-unit clean

install: $(VENV)/.installed jars

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

# JVM jars from Maven Central, declared in pom.xml; never downloaded at run time. Then
# Wayline's own (jvm/pom.xml: the routing function the delivery job's executors run),
# compiled by Maven with the JDK (javac 17), beside them on Spark's class path.
JVM_SOURCES := $(shell find jvm/src -name '*.java')

jars: jars/.fetched jars/spark/wayline-spark.jar

jars/.fetched: pom.xml .mvn/settings.xml
	rm -rf jars/broker jars/spark
	$(MVN) -P broker dependency:copy-dependencies
	$(MVN) -P spark dependency:copy-dependencies
	touch $@

jars/spark/wayline-spark.jar: jars/.fetched jvm/pom.xml $(JVM_SOURCES)
	$(MVN) -f jvm/pom.xml package
	cp jvm/target/wayline-spark.jar $@

# The Flink SQL baseline of bench/rules.py: PyFlink in a virtualenv of its own, so the
# project's dependencies never see it, and Flink's Kafka connector (pom.xml, profile flink).
FLINK_VENV := bench/results/flink-venv
PYFLINK := apache-flink==2.3.0

bench-flink: $(FLINK_VENV)/.installed jars/flink/.fetched

$(FLINK_VENV)/.installed:
	$(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/pip install -q "$(PYFLINK)"
	touch $@

jars/flink/.fetched: pom.xml .mvn/settings.xml
	rm -rf jars/flink
	$(MVN) -P flink dependency:copy-dependencies
	touch $@

# The console's browser tests drive Debian's Chromium through Playwright, which downloads
# no browser of its own: the system package, installed once when it is missing.
$(CHROMIUM):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium

demo: install
	$(BIN)/wayline demo

# The linter first: an unused import or an unsorted block fails in seconds, not after the suite.
test: install $(CHROMIUM)
	$(BIN)/ruff check
	$(BIN)/pytest

test-unit: install
	$(BIN)/pytest -m "not integration"

clean:
	rm -rf $(VENV) jars jvm/target .wayline
