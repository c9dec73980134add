package com.exposurefilter.client;

import com.exposurefilter.v1.ExposureFilterGrpc;
import com.exposurefilter.v1.FilterRecalledRequest;
import com.exposurefilter.v1.FilterRecalledResponse;
import com.exposurefilter.v1.GetFilterRequest;
import com.exposurefilter.v1.GetFilterResponse;
import com.exposurefilter.v1.RecordExposureRequest;
import com.exposurefilter.v1.ReadStaleness;
import com.exposurefilter.v1.RecordExposureResponse;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Function;

/**
 * N in-process replicas whose answers a test scripts per replica: each
 * counts the requests it got (kept for inspection) and answers with the
 * script's status, or hangs when the script says so.
 */
final class ScriptedReplicas implements AutoCloseable {
  /** What a replica does with a call: OK, an error, or hang (never answer). */
  static final class Script {
    volatile Status status = Status.OK;
    volatile Metadata trailers;
    volatile boolean hang;
    // A copy past --max_serving_lag: FilterRecalled UNAVAILABLE unless the
    // request allows lagging, then an answer saying it lagged.
    volatile boolean lagging;
    volatile Function<GetFilterRequest, GetFilterResponse> getFilter =
        q -> GetFilterResponse.getDefaultInstance();
  }

  final List<Script> scripts = new ArrayList<>();
  final List<List<Object>> received = new ArrayList<>();
  final List<ManagedChannel> channels = new ArrayList<>();
  private final List<Server> servers = new ArrayList<>();

  ScriptedReplicas(int n) throws IOException {
    String prefix = "scripted-" + System.nanoTime() + "-";
    for (int i = 0; i < n; i++) {
      Script script = new Script();
      List<Object> got = new CopyOnWriteArrayList<>();
      scripts.add(script);
      received.add(got);
      servers.add(InProcessServerBuilder.forName(prefix + i).directExecutor()
          .addService(new Replica(script, got)).build().start());
      channels.add(InProcessChannelBuilder.forName(prefix + i).directExecutor().build());
    }
  }

  RoutingClient.Builder router(int partitions) {
    // A deadline no loaded machine reaches; tests of deadlines set their own.
    return RoutingClient.builder().channels(channels).partitions(partitions)
        .deadline(java.time.Duration.ofSeconds(30));
  }

  @Override
  public void close() {
    channels.forEach(ManagedChannel::shutdownNow);
    servers.forEach(Server::shutdownNow);
  }

  private static final class Replica extends ExposureFilterGrpc.ExposureFilterImplBase {
    private final Script script;
    private final List<Object> got;

    Replica(Script script, List<Object> got) {
      this.script = script;
      this.got = got;
    }

    private <T> boolean fail(Object request, StreamObserver<T> out) {
      got.add(request);
      if (script.hang) {
        return true;
      }
      if (!script.status.isOk()) {
        out.onError(script.status.asRuntimeException(script.trailers));
        return true;
      }
      return false;
    }

    @Override
    public void filterRecalled(FilterRecalledRequest q, StreamObserver<FilterRecalledResponse> o) {
      if (script.lagging) {
        got.add(q);
        if (!q.getAllowLagging()) {
          o.onError(Status.UNAVAILABLE.withDescription("this copy is lagging 1.3s behind")
              .asRuntimeException());
          return;
        }
        o.onNext(FilterRecalledResponse.newBuilder().addAllKeptIds(q.getCandidateIdsList())
            .setStaleness(ReadStaleness.newBuilder().setLagMs(1300).setLagging(true)).build());
        o.onCompleted();
        return;
      }
      if (!fail(q, o)) {
        o.onNext(FilterRecalledResponse.newBuilder().addAllKeptIds(q.getCandidateIdsList())
            .build());
        o.onCompleted();
      }
    }

    @Override
    public void recordExposure(RecordExposureRequest q, StreamObserver<RecordExposureResponse> o) {
      if (!fail(q, o)) {
        RecordExposureResponse.Builder r = RecordExposureResponse.newBuilder();
        q.getExposuresList().forEach(e -> {
          r.setItemsRecorded(r.getItemsRecorded() + e.getItemIdsCount());
          r.putWrittenOffsets(Partitioning.partitionForUser(e.getUserId(), 12), 41);
        });
        o.onNext(r.build());
        o.onCompleted();
      }
    }

    @Override
    public void getFilter(GetFilterRequest q, StreamObserver<GetFilterResponse> o) {
      if (!fail(q, o)) {
        o.onNext(script.getFilter.apply(q));
        o.onCompleted();
      }
    }
  }
}
