# The two commands a newcomer needs: `make demo` and `make test` (see README.md).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
MVN := mvn -q -B -s .mvn/settings.xml

.PHONY: install jars demo test test-unit clean

install: $(VENV)/.installed jars

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

# JVM jars from Maven Central, declared in pom.xml; never downloaded at run time.
jars: jars/.fetched

jars/.fetched: pom.xml .mvn/settings.xml
	rm -rf jars/broker jars/spark
	$(MVN) -P broker dependency:copy-dependencies
	$(MVN) -P spark dependency:copy-dependencies
	touch $@

demo: install
	$(BIN)/wayline demo

# The linter first: an unused import or an unsorted block fails in seconds, not after the suite.
test: install
	$(BIN)/ruff check
	$(BIN)/pytest

test-unit: install
	$(BIN)/pytest -m "not integration"

clean:
	rm -rf $(VENV) jars .wayline
