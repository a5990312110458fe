package dev.stoker.operators.model;

/** The pipeline stage at which a record was rejected. */
public enum Stage {
    PARSE,
    FETCH,
    DECODE,
    PREPROCESS,
    TOKENIZE
}
