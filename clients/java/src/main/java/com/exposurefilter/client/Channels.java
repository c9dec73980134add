package com.exposurefilter.client;

import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import java.util.List;
import java.util.Map;

/**
 * Channels with the service's retry policy: UNAVAILABLE retried on every
 * exposure.v1 RPC (all are safe to repeat), at most {@code maxAttempts}
 * (gRPC caps it at 5) with exponential backoff, by gRPC's own retry
 * machinery, inside each call's deadline. The transport is Debian's
 * grpc-netty.
 */
public final class Channels {
  public static final String SERVICE = "exposure.v1.ExposureFilter";

  private Channels() {}

  /** A plaintext channel to {@code target} ("host:port") with the retry policy. */
  public static ManagedChannel connect(String target, int maxAttempts) {
    return connect(target, InsecureChannelCredentials.create(), maxAttempts);
  }

  public static ManagedChannel connect(String target, ChannelCredentials credentials,
      int maxAttempts) {
    var builder = Grpc.newChannelBuilder(target, credentials);
    if (maxAttempts > 1) {
      builder.defaultServiceConfig(retryServiceConfig(maxAttempts)).enableRetry();
    } else {
      builder.disableRetry();
    }
    return builder.build();
  }

  /** The service config (as gRPC's JSON object model) that retries UNAVAILABLE. */
  public static Map<String, Object> retryServiceConfig(int maxAttempts) {
    Map<String, Object> retry = Map.of(
        "maxAttempts", (double) Math.min(maxAttempts, 5),
        "initialBackoff", "0.05s",
        "maxBackoff", "1s",
        "backoffMultiplier", 2.0,
        "retryableStatusCodes", List.of("UNAVAILABLE"));
    Map<String, Object> method = Map.of(
        "name", List.of(Map.of("service", SERVICE)),
        "retryPolicy", retry);
    return Map.of("methodConfig", List.of(method));
  }
}
