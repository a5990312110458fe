/*
 * Licensed to the Apache Software Foundation (ASF) under one
 * or more contributor license agreements.  See the NOTICE file
 * distributed with this work for additional information
 * regarding copyright ownership.  The ASF licenses this file
 * to you under the Apache License, Version 2.0 (the
 * "License"); you may not use this file except in compliance
 * with the License.  You may obtain a copy of the License at
 *
 *     http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing, software
 * distributed under the License is distributed on an "AS IS" BASIS,
 * WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 * See the License for the specific language governing permissions and
 * limitations under the License.
 */

package dev.stoker.bench.autoscaler;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.java.utils.ParameterTool;
import org.apache.flink.autoscaler.JobAutoScaler;
import org.apache.flink.autoscaler.JobAutoScalerContext;
import org.apache.flink.autoscaler.JobAutoScalerImpl;
import org.apache.flink.autoscaler.RestApiMetricsCollector;
import org.apache.flink.autoscaler.ScalingExecutor;
import org.apache.flink.autoscaler.ScalingMetricEvaluator;
import org.apache.flink.autoscaler.config.AutoScalerOptions;
import org.apache.flink.autoscaler.event.AutoScalerEventHandler;
import org.apache.flink.autoscaler.event.LoggingEventHandler;
import org.apache.flink.autoscaler.realizer.ScalingRealizer;
import org.apache.flink.autoscaler.state.InMemoryAutoScalerStateStore;
import org.apache.flink.autoscaler.tuning.ConfigChanges;
import org.apache.flink.autoscaler.utils.JobStatusUtils;
import org.apache.flink.client.program.rest.RestClusterClient;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.GlobalConfiguration;
import org.apache.flink.configuration.JobManagerOptions;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.client.JobStatusMessage;
import org.apache.flink.runtime.highavailability.nonha.standalone.StandaloneClientHAServices;
import org.apache.flink.runtime.jobgraph.JobResourceRequirements;
import org.apache.flink.runtime.jobgraph.JobVertexID;
import org.apache.flink.runtime.jobgraph.JobVertexResourceRequirements;
import org.apache.flink.runtime.rest.messages.EmptyMessageParameters;
import org.apache.flink.runtime.rest.messages.EmptyRequestBody;
import org.apache.flink.runtime.rest.messages.JobMessageParameters;
import org.apache.flink.runtime.rest.messages.JobsOverviewHeaders;
import org.apache.flink.runtime.rest.messages.job.JobManagerJobConfigurationHeaders;
import org.apache.flink.runtime.rest.messages.job.JobResourceRequirementsBody;
import org.apache.flink.runtime.rest.messages.job.JobResourceRequirementsHeaders;
import org.apache.flink.runtime.rest.messages.job.JobResourcesRequirementsUpdateHeaders;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Flink's standalone autoscaler, condensed: the wiring of {@code flink-autoscaler-standalone}
 * 1.10.0 (apache/flink-kubernetes-operator, tag {@code release-1.10.0}:
 * {@code StandaloneAutoscalerEntrypoint}, {@code StandaloneAutoscalerExecutor}, {@code
 * FlinkClusterJobListFetcher} and {@code RescaleApiScalingRealizer}, Apache License 2.0) around the
 * autoscaler library {@code org.apache.flink:flink-autoscaler} 1.10.0, which does all the
 * measuring and deciding ({@link JobAutoScalerImpl}, {@link RestApiMetricsCollector}, {@link
 * ScalingMetricEvaluator}, {@link ScalingExecutor}), with the in-memory state store and the
 * logging event handler (the standalone defaults). The module is not on Maven Central, hence this
 * copy; what it leaves out: the JDBC state store and event handler, and running several jobs' cycles
 * in parallel (one cycle at a time here).
 *
 * <p>Every control-loop interval it lists the cluster's jobs over REST, gives each its
 * configuration (this process's options, then the job's {@code /jobs/<id>/jobmanager/config} on
 * top) and calls {@link JobAutoScaler#scale}. A scaling decision is applied in place, through the
 * adaptive scheduler's {@code PUT /jobs/<id>/resource-requirements} (lower bound 1, upper bound the
 * new parallelism), as the web UI's rescale does.
 *
 * <p>Options as {@code --key value} (or a {@code config.yaml} in {@code FLINK_CONF_DIR}):
 * {@code autoscaler.standalone.fetcher.flink-cluster.host} / {@code .port} (the cluster's REST
 * address, default localhost:8081), {@code autoscaler.standalone.control-loop.interval} (default 10
 * s), and every {@code job.autoscaler.*} option of the library.
 */
public final class StandaloneAutoscaler implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(StandaloneAutoscaler.class);

    static final ConfigOption<String> HOST =
            ConfigOptions.key("autoscaler.standalone.fetcher.flink-cluster.host")
                    .stringType()
                    .defaultValue("localhost");
    static final ConfigOption<Integer> PORT =
            ConfigOptions.key("autoscaler.standalone.fetcher.flink-cluster.port")
                    .intType()
                    .defaultValue(8081);
    static final ConfigOption<Duration> INTERVAL =
            ConfigOptions.key("autoscaler.standalone.control-loop.interval")
                    .durationType()
                    .defaultValue(Duration.ofSeconds(10));

    private final Configuration conf;
    private final String restAddress;
    private final JobAutoScaler<JobID, JobAutoScalerContext<JobID>> autoscaler;
    private volatile boolean stopped;

    StandaloneAutoscaler(Configuration conf) {
        this.conf = conf;
        this.restAddress = "http://" + conf.get(HOST) + ":" + conf.get(PORT);
        var events = new LoggingEventHandler<JobID, JobAutoScalerContext<JobID>>();
        var state = new InMemoryAutoScalerStateStore<JobID, JobAutoScalerContext<JobID>>();
        this.autoscaler =
                new JobAutoScalerImpl<>(
                        new RestApiMetricsCollector<>(),
                        new ScalingMetricEvaluator(),
                        new ScalingExecutor<>(events, state),
                        events,
                        new RescaleApiScalingRealizer(events),
                        state);
    }

    public static void main(String[] args) throws Exception {
        Configuration conf =
                GlobalConfiguration.loadConfiguration(
                        ParameterTool.fromArgs(args).getConfiguration());
        LOG.info("The standalone autoscaler is started, configuration: {}", conf);
        try (StandaloneAutoscaler autoscaler = new StandaloneAutoscaler(conf)) {
            autoscaler.run();
        }
    }

    /** The control loop, until the process is killed. */
    void run() throws InterruptedException {
        long interval = conf.get(INTERVAL).toMillis();
        while (!stopped) {
            long start = System.currentTimeMillis();
            cycle();
            Thread.sleep(Math.max(0, interval - (System.currentTimeMillis() - start)));
        }
    }

    /** One control-loop pass over the cluster's jobs (FlinkClusterJobListFetcher + executor). */
    void cycle() {
        Duration timeout = conf.get(AutoScalerOptions.FLINK_CLIENT_TIMEOUT);
        try (RestClusterClient<String> client = client()) {
            var jobs =
                    client.sendRequest(
                                    JobsOverviewHeaders.getInstance(),
                                    EmptyMessageParameters.getInstance(),
                                    EmptyRequestBody.getInstance())
                            .thenApply(JobStatusUtils::toJobStatusMessage)
                            .get(timeout.toSeconds(), TimeUnit.SECONDS);
            for (JobStatusMessage job : jobs) {
                JobAutoScalerContext<JobID> context = context(client, job, timeout);
                try {
                    autoscaler.scale(context);
                } catch (Throwable e) {
                    LOG.error("Error while scaling job {}", job.getJobId(), e);
                }
            }
        } catch (Throwable e) {
            LOG.error("Error while fetching the job list from {}", restAddress, e);
        }
    }

    private JobAutoScalerContext<JobID> context(
            RestClusterClient<String> client, JobStatusMessage job, Duration timeout)
            throws Exception {
        var parameters = new JobMessageParameters();
        parameters.jobPathParameter.resolve(job.getJobId());
        var jobConf =
                client.sendRequest(
                                JobManagerJobConfigurationHeaders.getInstance(),
                                parameters,
                                EmptyRequestBody.getInstance())
                        .get(timeout.toSeconds(), TimeUnit.SECONDS);
        Configuration merged = new Configuration(conf);
        jobConf.forEach(entry -> merged.setString(entry.getKey(), entry.getValue()));
        return new JobAutoScalerContext<>(
                job.getJobId(),
                job.getJobId(),
                job.getJobState(),
                merged,
                new UnregisteredMetricsGroup(),
                this::client);
    }

    private RestClusterClient<String> client() throws Exception {
        return new RestClusterClient<>(
                new Configuration(),
                "clusterId",
                (c, e) -> new StandaloneClientHAServices(restAddress));
    }

    @Override
    public void close() {
        stopped = true;
    }

    /**
     * Applies parallelism overrides in place through the adaptive scheduler's resource
     * requirements (RescaleApiScalingRealizer).
     */
    static final class RescaleApiScalingRealizer
            implements ScalingRealizer<JobID, JobAutoScalerContext<JobID>> {
        private final AutoScalerEventHandler<JobID, JobAutoScalerContext<JobID>> events;

        RescaleApiScalingRealizer(
                AutoScalerEventHandler<JobID, JobAutoScalerContext<JobID>> events) {
            this.events = events;
        }

        @Override
        public void realizeParallelismOverrides(
                JobAutoScalerContext<JobID> context, Map<String, String> overrides)
                throws Exception {
            Configuration conf = context.getConfiguration();
            if (conf.get(JobManagerOptions.SCHEDULER) != JobManagerOptions.SchedulerType.Adaptive) {
                LOG.warn("In-place rescaling is only available with the adaptive scheduler.");
                return;
            }
            if (context.getJobStatus() != JobStatus.RUNNING) {
                LOG.warn("Job in terminal or reconciling state cannot be scaled in-place.");
                return;
            }
            long timeout = conf.get(AutoScalerOptions.FLINK_CLIENT_TIMEOUT).toSeconds();
            var parameters = new JobMessageParameters();
            parameters.jobPathParameter.resolve(context.getJobID());
            try (RestClusterClient<String> client = context.getRestClusterClient()) {
                Map<JobVertexID, JobVertexResourceRequirements> requirements =
                        new HashMap<>(
                                client.sendRequest(
                                                new JobResourceRequirementsHeaders(),
                                                parameters,
                                                EmptyRequestBody.getInstance())
                                        .get(timeout, TimeUnit.SECONDS)
                                        .asJobResourceRequirements()
                                        .get()
                                        .getJobVertexParallelisms());
                boolean updated = false;
                for (var entry : requirements.entrySet()) {
                    String override = overrides.get(entry.getKey().toString());
                    if (override == null) {
                        continue;
                    }
                    var parallelism =
                            new JobVertexResourceRequirements.Parallelism(
                                    1, Integer.parseInt(override));
                    if (!entry.getValue().getParallelism().equals(parallelism)) {
                        entry.setValue(new JobVertexResourceRequirements(parallelism));
                        updated = true;
                    }
                }
                if (!updated) {
                    LOG.info("Vertex resources requirements already match target, nothing to do...");
                    return;
                }
                client.sendRequest(
                                new JobResourcesRequirementsUpdateHeaders(),
                                parameters,
                                new JobResourceRequirementsBody(
                                        new JobResourceRequirements(requirements)))
                        .get(timeout, TimeUnit.SECONDS);
                events.handleEvent(
                        context,
                        AutoScalerEventHandler.Type.Normal,
                        "Scaling",
                        "In-place scaling triggered, the new requirements is " + requirements,
                        null,
                        null);
            }
        }

        @Override
        public void realizeConfigOverrides(
                JobAutoScalerContext<JobID> context, ConfigChanges configChanges) {
            // Not supported by the standalone autoscaler either (TaskManager memory tuning).
        }
    }
}
