package dev.stoker.connectors.shm;

import java.util.ArrayDeque;
import java.util.Map;
import java.util.TreeMap;
import org.apache.arrow.memory.AllocationManager;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.unsafe.UnsafeAllocationManager;
import org.apache.arrow.memory.util.MemoryUtil;

/**
 * Off-heap memory for the sink's Arrow buffers that keeps the large block of one batch for the
 * next, instead of giving it back to the OS.
 *
 * <p>A batch's {@code pixel_values} buffer is tens of MB (8 samples of 1024 patches x 1176 float32
 * = 38.5 MB). {@code malloc} serves such a size with a fresh {@code mmap}, so without a pool every
 * batch pays a page fault and a kernel zeroing per 4 KiB page before Arrow even writes a value, and
 * an {@code munmap} after: on the 2-core bench machine encoding such a batch took 22 ms with fresh
 * memory and 8.5 ms with reused memory (bench/README.md). Blocks of at least {@value
 * #MIN_POOLED_BYTES} bytes are pooled: a request takes the smallest free block that is at least as
 * large and at most twice as large, else allocates a new block of the requested size (Arrow
 * accounts the requested size either way); a released block goes back to the pool, which keeps at
 * most {@value #MAX_FREE_BLOCKS} (the larger; smaller ones are freed). So a sink writer holds at
 * most one batch-sized block of native memory between batches, besides what it is writing; like all
 * of Arrow's memory it is outside Flink's managed memory and JVM heap, in the TaskManager process's
 * overhead. Smaller requests are allocated and freed as by Arrow's {@link UnsafeAllocationManager}.
 * Memory comes from {@link MemoryUtil#allocateMemory} and is not zeroed (Arrow's vectors zero what
 * they allocate). Thread-safe; {@link #close} frees the pooled block, and a block released after
 * that is freed at once.
 */
final class ArrowMemoryPool implements AllocationManager.Factory, AutoCloseable {
    /** Smallest block size that is pooled, in bytes (1 MiB). */
    static final long MIN_POOLED_BYTES = 1L << 20;

    /** Most free blocks kept: the last batch's, for the next batch. */
    static final int MAX_FREE_BLOCKS = 1;

    /** Free blocks: size in bytes -> their addresses. */
    private final TreeMap<Long, ArrayDeque<Long>> free = new TreeMap<>();

    private int freeBlocks;
    private boolean closed;

    @Override
    public AllocationManager create(BufferAllocator accountingAllocator, long size) {
        if (size >= MIN_POOLED_BYTES) {
            Block reused = take(accountingAllocator, size);
            if (reused != null) {
                return reused;
            }
        }
        return new Block(accountingAllocator, MemoryUtil.allocateMemory(size), size, size);
    }

    @Override
    public ArrowBuf empty() {
        return UnsafeAllocationManager.FACTORY.empty();
    }

    /** Frees the pooled blocks; blocks still in use are freed when they are released. */
    @Override
    public synchronized void close() {
        closed = true;
        while (!free.isEmpty()) {
            MemoryUtil.freeMemory(removeOne(free.firstKey()));
        }
    }

    /** Bytes held in free blocks. */
    synchronized long freeBytes() {
        long bytes = 0;
        for (Map.Entry<Long, ArrayDeque<Long>> e : free.entrySet()) {
            bytes += e.getKey() * e.getValue().size();
        }
        return bytes;
    }

    /** A free block of {@code size..2*size} bytes, or null. */
    private synchronized Block take(BufferAllocator accountingAllocator, long size) {
        Long fit = free.ceilingKey(size);
        if (fit == null || fit > 2 * size) {
            return null;
        }
        return new Block(accountingAllocator, removeOne(fit), fit, size);
    }

    /** Removes one free block of {@code size} bytes; returns its address. */
    private long removeOne(long size) {
        ArrayDeque<Long> addresses = free.get(size);
        long address = addresses.pop();
        if (addresses.isEmpty()) {
            free.remove(size);
        }
        freeBlocks--;
        return address;
    }

    private synchronized void give(long address, long size) {
        if (closed || size < MIN_POOLED_BYTES) {
            MemoryUtil.freeMemory(address);
            return;
        }
        free.computeIfAbsent(size, s -> new ArrayDeque<>()).push(address);
        freeBlocks++;
        while (freeBlocks > MAX_FREE_BLOCKS) {
            MemoryUtil.freeMemory(removeOne(free.firstKey()));
        }
    }

    /**
     * One block handed to Arrow: Arrow accounts the {@code size} it asked for, the pool takes back
     * the block's whole {@code capacity}.
     */
    private final class Block extends AllocationManager {
        private final long address;
        private final long capacity;
        private final long size;

        Block(BufferAllocator accountingAllocator, long address, long capacity, long size) {
            super(accountingAllocator);
            this.address = address;
            this.capacity = capacity;
            this.size = size;
        }

        @Override
        public long getSize() {
            return size;
        }

        @Override
        protected long memoryAddress() {
            return address;
        }

        @Override
        protected void release0() {
            give(address, capacity);
        }
    }
}
