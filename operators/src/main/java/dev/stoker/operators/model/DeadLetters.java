package dev.stoker.operators.model;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.util.OutputTag;

/** The side output every operator sends its rejected records to. */
public final class DeadLetters {
    /** Side-output tag for {@link DeadLetter}s. */
    public static final OutputTag<DeadLetter> TAG =
            new OutputTag<>("dead-letters", TypeInformation.of(DeadLetter.class));

    private DeadLetters() {}
}
