package dev.stoker.operators.json;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonFactoryBuilder;
import com.fasterxml.jackson.core.util.BufferRecycler;
import com.fasterxml.jackson.core.util.JsonRecyclerPools;
import com.fasterxml.jackson.core.util.RecyclerPool;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * The one way the job makes Jackson factories and mappers: every one recycles its buffers through a
 * pool owned by the job's classes instead of Jackson's default, a {@code ThreadLocal} per thread.
 *
 * <p>Why: Jackson's default pool leaves a {@code SoftReference} to a {@link BufferRecycler} (a job
 * class) in the thread-local map of every thread that parsed or wrote JSON. Flink calls code of the
 * job on threads it keeps for the TaskManager's life, e.g. a sink gauge that reads the trainer's
 * {@code ack.json} runs on the {@code flink-metrics-N} thread; that entry then keeps the finished
 * job's class loader, and every class of the job (about 1,400 classes and 9 MiB of metaspace), in
 * the TaskManager for as long as the thread lives (a soft reference survives a full GC while the
 * heap has room). With {@link JsonRecyclerPools#sharedConcurrentDequePool()} the recyclers are held
 * by a static of the job's own Jackson classes and go with the job's class loader.
 */
public final class Json {
    private static final RecyclerPool<BufferRecycler> POOL =
            JsonRecyclerPools.sharedConcurrentDequePool();

    private Json() {}

    /** A factory builder with the job's buffer pool; add the parser settings a caller needs. */
    public static JsonFactoryBuilder factoryBuilder() {
        return new JsonFactoryBuilder().recyclerPool(POOL);
    }

    /** A streaming factory with the job's buffer pool and Jackson's default settings. */
    public static JsonFactory factory() {
        return factoryBuilder().build();
    }

    /** An {@link ObjectMapper} over {@link #factory()}, otherwise Jackson's defaults. */
    public static ObjectMapper mapper() {
        return mapper(factory());
    }

    /**
     * An {@link ObjectMapper} over {@code factory}, a factory of another format (e.g. YAML) that
     * its caller built with {@link #pool()}.
     */
    public static ObjectMapper mapper(JsonFactory factory) {
        return new ObjectMapper(factory);
    }

    /** The job's buffer pool, for the builder of a factory of another format. */
    public static RecyclerPool<BufferRecycler> pool() {
        return POOL;
    }
}
