package dev.wayline.routing;

import org.apache.spark.types.variant.Variant;

/**
 * What a filter's path finds in an event: its JSON kind and value. The kinds are those of
 * wayline.registry.filter's evaluator; MISSING is a path that leads nowhere, OTHER a value no
 * filter compares (an object, an array).
 */
record Found(Kind kind, boolean bool, double number, String string, long micros) {
  enum Kind { MISSING, NULL, BOOLEAN, NUMBER, STRING, TIME, OTHER }

  static final Found MISSING = new Found(Kind.MISSING, false, 0, null, 0);
  private static final Found NULL = new Found(Kind.NULL, false, 0, null, 0);
  private static final Found OTHER = new Found(Kind.OTHER, false, 0, null, 0);

  static Found string(String text) {
    return new Found(Kind.STRING, false, 0, text, 0);
  }

  static Found time(long micros) {
    return new Found(Kind.TIME, false, 0, null, micros);
  }

  static Found of(Variant value) {
    switch (value.getType()) {
      case NULL:
        return NULL;
      case BOOLEAN:
        return new Found(Kind.BOOLEAN, value.getBoolean(), 0, null, 0);
      case STRING:
        return string(value.getString());
      // Every JSON number is a 64-bit float to a filter, as to the Python evaluator.
      case LONG:
        return number(value.getLong());
      case DOUBLE:
        return number(value.getDouble());
      case FLOAT:
        return number(value.getFloat());
      case DECIMAL:
        return number(value.getDecimal().doubleValue());
      default:
        return OTHER;
    }
  }

  private static Found number(double number) {
    return new Found(Kind.NUMBER, false, number, null, 0);
  }
}
