package com.exposurefilter.client;

import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.Optional;

/**
 * The owner a partitioned replica names when it refuses another replica's
 * user (FAILED_PRECONDITION), from the trailing metadata key
 * {@code x-exposure-owner}:
 * {@code ordinal=1;partition=7;partitions=12;replicas=3;self=0[;replication_factor=2][;address=...]}
 * (include/exposure_filter/owner_hint.h). A missing replication_factor is 1.
 */
public record OwnerHint(int ordinal, int partition, int partitions, int replicas, int self,
    int replicationFactor, String address) {

  public static final Metadata.Key<String> METADATA_KEY =
      Metadata.Key.of("x-exposure-owner", Metadata.ASCII_STRING_MARSHALLER);

  /** Parses the metadata value; empty if a number does not parse. */
  public static Optional<OwnerHint> parse(String value) {
    int ordinal = -1;
    int partition = -1;
    int partitions = -1;
    int replicas = -1;
    int self = -1;
    int replicationFactor = 1;
    String address = "";
    try {
      for (String pair : value.split(";")) {
        int eq = pair.indexOf('=');
        if (eq < 0) {
          continue;
        }
        String k = pair.substring(0, eq);
        String v = pair.substring(eq + 1);
        switch (k) {
          case "ordinal" -> ordinal = Integer.parseInt(v);
          case "partition" -> partition = Integer.parseInt(v);
          case "partitions" -> partitions = Integer.parseInt(v);
          case "replicas" -> replicas = Integer.parseInt(v);
          case "self" -> self = Integer.parseInt(v);
          case "replication_factor" -> replicationFactor = Integer.parseInt(v);
          case "address" -> address = v;
          default -> { }  // a later server's key: ignored
        }
      }
    } catch (NumberFormatException e) {
      return Optional.empty();
    }
    return Optional.of(new OwnerHint(ordinal, partition, partitions, replicas, self,
        replicationFactor, address));
  }

  /** The hint a FAILED_PRECONDITION carries, if any. */
  public static Optional<OwnerHint> of(StatusRuntimeException e) {
    if (e.getStatus().getCode() != Status.Code.FAILED_PRECONDITION || e.getTrailers() == null) {
      return Optional.empty();
    }
    String value = e.getTrailers().get(METADATA_KEY);
    return value == null ? Optional.empty() : parse(value);
  }
}
