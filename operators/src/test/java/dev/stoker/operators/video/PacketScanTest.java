package dev.stoker.operators.video;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

/** {@link PacketScan#plan}: where each sampled frame decodes from, and when not to skip at all. */
class PacketScanTest {
    /** 24 packets in decode order, a keyframe every 6, B-frames shown before the P they follow. */
    private static PacketScan closedGops() {
        long[] pts = new long[24];
        boolean[] key = new boolean[24];
        for (int g = 0; g < 4; g++) {
            // decode order I P B B P B  ->  display I B B P B P (frame numbers below)
            int[] shown = {0, 3, 1, 2, 5, 4};
            for (int k = 0; k < 6; k++) {
                pts[g * 6 + k] = 10L * (g * 6 + shown[k]);
                key[g * 6 + k] = k == 0;
            }
        }
        return new PacketScan(pts, key);
    }

    @Test
    void eachFrameStartsAtItsGroupsKeyframe() {
        PacketScan.Plan plan = closedGops().plan(new int[] {2, 20}, 24);
        assertThat(plan).isNotNull();
        assertThat(plan.frames()).containsExactly(2, 20);
        assertThat(plan.starts()).containsExactly(0, 18);
        // frame 2 is packet 3, frame 20 packet 21 (decode order): 0..3 and 18..21 decoded, 8 of 22
        assertThat(plan.skippedPackets()).isEqualTo(22 - 8);
        assertThat(plan.indexOf(200)).isEqualTo(20);
        assertThat(plan.indexOf(205)).isEqualTo(-1);
        assertThat(plan.indexOf(PacketScan.NO_PTS)).isEqualTo(-1);
    }

    @Test
    void aLeadingFrameOfAnOpenGopStartsAtTheGroupBefore() {
        // group 2's keyframe (packet 6) is shown at 8; packets 7 and 8 are shown before it (6, 7)
        long[] pts = new long[24];
        for (int i = 0; i < pts.length; i++) {
            pts[i] = 10L * i;
        }
        pts[6] = 80;
        pts[7] = 60;
        pts[8] = 70;
        boolean[] key = new boolean[pts.length];
        key[0] = true;
        key[6] = true;
        key[12] = true;
        key[18] = true;
        PacketScan.Plan plan = new PacketScan(pts, key).plan(new int[] {6, 22}, 0);
        assertThat(plan).isNotNull();
        // frame 6 is packet 7, shown before its keyframe (packet 6, frame 8): from packet 0
        assertThat(plan.starts()).containsExactly(0, 18);
    }

    @Test
    void noSkippingWhenTheIndexIsNotCleanOrLittleWouldBeSkipped() {
        PacketScan scan = closedGops();
        assertThat(scan.plan(new int[] {1, 4, 8, 11, 14, 17, 20}, 24))
                .as("a frame every 3: 2 of 22 packets to skip")
                .isNull();
        assertThat(scan.plan(new int[] {2, 20}, 25)).as("stored count differs").isNull();
        assertThat(scan.plan(new int[] {40}, 24)).as("past the end").isNull();
        long[] pts = scan.pts().clone();
        pts[7] = pts[8];
        assertThat(new PacketScan(pts, scan.key()).plan(new int[] {2, 20}, 0))
                .as("two packets with one timestamp")
                .isNull();
        pts = scan.pts().clone();
        pts[7] = PacketScan.NO_PTS;
        assertThat(new PacketScan(pts, scan.key()).plan(new int[] {2, 20}, 0))
                .as("a packet without a timestamp")
                .isNull();
        boolean[] key = scan.key().clone();
        key[0] = false;
        assertThat(new PacketScan(scan.pts(), key).plan(new int[] {2, 20}, 0))
                .as("the first packet is no keyframe")
                .isNull();
    }
}
