package dev.stoker.connectors.shm;

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
 * an {@code munmap} after: on the 2-core bench machine encoding such a batch took 27 ms with fresh
 * memory and 11-12 ms with reused memory ({@code bench/sink-encode.sh}). Blocks of at least {@value
 * #MIN_POOLED_BYTES} bytes are pooled: the pool keeps one free block (of two, the larger; the
 * smaller is freed), and a request takes it if it is at least as large and at most twice as large,
 * else allocates a new block of the requested size (Arrow accounts the requested size either way).
 * So a sink writer holds at most one batch-sized block of native memory between batches, besides
 * what it is writing; like all of Arrow's memory it is outside Flink's managed memory and JVM heap,
 * in the TaskManager process's overhead. Smaller requests are allocated and freed as by Arrow's
 * {@link UnsafeAllocationManager}. Memory comes from {@link MemoryUtil#allocateMemory} and is not
 * zeroed (Arrow's vectors zero what they allocate; the pixel columns' values are loaded unzeroed
 * and written whole by {@code ArrowBatchEncoder}, so a reused block's old bytes never reach a
 * batch). Thread-safe; {@link #close} frees the pooled block, and a block released after that is
 * freed at once.
 */
final class ArrowMemoryPool implements AllocationManager.Factory, AutoCloseable {
    /** Smallest block size that is pooled, in bytes (1 MiB). */
    static final long MIN_POOLED_BYTES = 1L << 20;

    /** The free block's address and capacity in bytes; capacity 0 when there is none. */
    private long freeAddress;

    private long freeCapacity;
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

    /** Frees the pooled block; blocks still in use are freed when they are released. */
    @Override
    public synchronized void close() {
        closed = true;
        if (freeCapacity > 0) {
            MemoryUtil.freeMemory(freeAddress);
            freeCapacity = 0;
        }
    }

    /** Bytes held in the free block (0 when there is none). */
    synchronized long freeBytes() {
        return freeCapacity;
    }

    /** The free block if it holds {@code size..2*size} bytes, or null. */
    private synchronized Block take(BufferAllocator accountingAllocator, long size) {
        if (freeCapacity < size || freeCapacity > 2 * size) {
            return null;
        }
        Block block = new Block(accountingAllocator, freeAddress, freeCapacity, size);
        freeCapacity = 0;
        return block;
    }

    /** Keeps the larger of the released block and the free one; frees the other. */
    private synchronized void give(long address, long capacity) {
        if (closed || capacity < MIN_POOLED_BYTES) {
            MemoryUtil.freeMemory(address);
        } else if (capacity <= freeCapacity) {
            MemoryUtil.freeMemory(address);
        } else {
            if (freeCapacity > 0) {
                MemoryUtil.freeMemory(freeAddress);
            }
            freeAddress = address;
            freeCapacity = capacity;
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
