package com.exposurefilter.client;

/**
 * The bytes are not a valid filter of a version this decoder reads
 * (docs/filter-format.md, "What a decoder must reject"). The message names
 * the first check that failed, in the specified order.
 */
public final class MalformedFilterException extends Exception {
  private static final long serialVersionUID = 1L;

  public MalformedFilterException(String message) {
    super(message);
  }
}
