package dev.wayline.routing;

import com.fasterxml.jackson.databind.JsonNode;

/** A filter's literal: its kind keeps true and 1 apart, as the registry's parser typed it. */
record Value(Found.Kind kind, boolean bool, double number, String string, long micros) {

  /** {"kind": "null" | "boolean" | "number" | "string" | "time", "raw": ...}; a time's raw is epoch microseconds. */
  static Value read(JsonNode node) {
    JsonNode raw = node.get("raw");
    switch (node.get("kind").asText()) {
      case "null":
        return new Value(Found.Kind.NULL, false, 0, null, 0);
      case "boolean":
        return new Value(Found.Kind.BOOLEAN, raw.asBoolean(), 0, null, 0);
      case "number":
        return new Value(Found.Kind.NUMBER, false, raw.asDouble(), null, 0);
      case "string":
        return new Value(Found.Kind.STRING, false, 0, raw.asText(), 0);
      case "time":
        return new Value(Found.Kind.TIME, false, 0, null, raw.asLong());
      default:
        throw new IllegalArgumentException("unknown value kind in the routing table: " + node);
    }
  }

  /** Whether {@code found} equals this value; a null value is met by a missing field too. */
  boolean equalTo(Found found) {
    if (kind == Found.Kind.NULL) {
      return found.kind() == Found.Kind.MISSING || found.kind() == Found.Kind.NULL;
    }
    return found.kind() == kind && order(found) == 0;
  }

  /** The sign of found - this, for a found value of this value's kind. */
  int order(Found found) {
    switch (kind) {
      case BOOLEAN:
        return found.bool() == bool ? 0 : 1;
      case NUMBER:
        // Not Double.compare: -0.0 and 0.0 are equal, as in JSON and in the Python evaluator.
        return found.number() < number ? -1 : found.number() > number ? 1 : 0;
      case STRING:
        return byCodePoint(found.string(), string);
      case TIME:
        return Long.compare(found.micros(), micros);
      default:
        throw new IllegalStateException("a " + kind + " has no order");
    }
  }

  /** Unicode code point order, as Python and Spark (UTF-8 bytes) compare strings; String.compareTo
   * compares UTF-16 units, which puts the supplementary planes before U+E000..U+FFFF. */
  static int byCodePoint(String left, String right) {
    int i = 0;
    int j = 0;
    while (i < left.length() && j < right.length()) {
      int a = left.codePointAt(i);
      int b = right.codePointAt(j);
      if (a != b) {
        return Integer.compare(a, b);
      }
      i += Character.charCount(a);
      j += Character.charCount(b);
    }
    return Integer.compare(left.length() - i, right.length() - j);
  }
}
