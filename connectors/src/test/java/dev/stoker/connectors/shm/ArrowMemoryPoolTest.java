package dev.stoker.connectors.shm;

import static org.assertj.core.api.Assertions.assertThat;

import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** Reuse and bounds of the sink's pooled Arrow memory, through a real {@link RootAllocator}. */
class ArrowMemoryPoolTest {
    private static final long MIB = 1L << 20;

    private final ArrowMemoryPool pool = new ArrowMemoryPool();
    private final BufferAllocator allocator =
            new RootAllocator(RootAllocator.configBuilder().allocationManagerFactory(pool).build());

    @AfterEach
    void close() {
        allocator.close();
        pool.close();
    }

    @Test
    void aReleasedLargeBlockServesTheNextRequestThatFits() {
        long address;
        try (ArrowBuf first = allocator.buffer(2 * MIB)) {
            address = first.memoryAddress();
            first.setLong(0, 42L);
        }
        assertThat(pool.freeBytes()).isEqualTo(2 * MIB);
        assertThat(allocator.getAllocatedMemory()).isZero();
        try (ArrowBuf second = allocator.buffer(2 * MIB - 4096)) {
            assertThat(second.memoryAddress()).isEqualTo(address);
            assertThat(pool.freeBytes()).isZero();
            second.setLong(second.capacity() - 8, 7L); // the whole request is usable
            assertThat(second.getLong(second.capacity() - 8)).isEqualTo(7L);
        }
    }

    /**
     * Above Arrow's 16 MiB chunk size requests are not rounded, so a reused block is often larger
     * than the request: Arrow must account the request, not the block, or its accounting goes
     * negative when the buffer is released.
     */
    @Test
    void aLargerReusedBlockIsAccountedAtTheRequestedSize() {
        long address;
        try (ArrowBuf first = allocator.buffer(40 * MIB)) {
            address = first.memoryAddress();
        }
        try (ArrowBuf second = allocator.buffer(36 * MIB + 12_345)) {
            assertThat(second.memoryAddress()).isEqualTo(address);
            assertThat(allocator.getAllocatedMemory()).isEqualTo(36 * MIB + 12_345);
        }
        assertThat(allocator.getAllocatedMemory()).isZero();
        assertThat(pool.freeBytes()).isEqualTo(40 * MIB); // the whole block is back
        try (ArrowBuf third = allocator.buffer(39 * MIB)) {
            assertThat(third.memoryAddress()).isEqualTo(address);
        }
    }

    @Test
    void aBlockMoreThanTwiceTheRequestIsNotHandedOut() {
        long large;
        try (ArrowBuf buf = allocator.buffer(8 * MIB)) {
            large = buf.memoryAddress();
        }
        try (ArrowBuf small = allocator.buffer(2 * MIB)) {
            assertThat(small.memoryAddress()).isNotEqualTo(large);
            assertThat(pool.freeBytes()).isEqualTo(8 * MIB);
        }
        assertThat(pool.freeBytes()).as("one free block: the larger stays").isEqualTo(8 * MIB);
    }

    @Test
    void keepsOneFreeBlockAndFreesTheSmallerOnes() {
        ArrowBuf a = allocator.buffer(2 * MIB);
        ArrowBuf b = allocator.buffer(8 * MIB);
        ArrowBuf c = allocator.buffer(4 * MIB);
        a.close();
        b.close();
        c.close();
        assertThat(pool.freeBytes()).isEqualTo(8 * MIB);
        try (ArrowBuf next = allocator.buffer(6 * MIB)) {
            assertThat(pool.freeBytes()).as("the 8 MiB block serves 6 MiB").isZero();
        }
    }

    @Test
    void smallBuffersAreNotPooled() {
        allocator.buffer(ArrowMemoryPool.MIN_POOLED_BYTES / 2).close();
        assertThat(pool.freeBytes()).isZero();
    }

    @Test
    void closeFreesThePoolAndBlocksReleasedAfterIt() {
        ArrowBuf kept = allocator.buffer(4 * MIB);
        allocator.buffer(2 * MIB).close();
        assertThat(pool.freeBytes()).isEqualTo(2 * MIB);
        pool.close();
        assertThat(pool.freeBytes()).isZero();
        kept.close();
        assertThat(pool.freeBytes()).isZero();
        assertThat(allocator.getAllocatedMemory()).isZero();
    }
}
