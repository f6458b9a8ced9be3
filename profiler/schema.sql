-- Ulysses Studio trace schema: one SQLite file per rank (RUN/trace/rank{r}.sqlite).
-- Tables that Nsight Systems' SQLite export also has keep its exact names and columns
-- (nsys "SQLite Export Schema Reference"), so nsys-style SQL runs on our traces and an
-- `nsys export --type sqlite` file opens in our viewer. Times are ns on the host clock
-- (CLOCK_MONOTONIC). globalTid = pid * 0x1000000 + tid and globalPid = pid * 0x1000000,
-- as nsys serializes them (PID = globalTid / 0x1000000 % 0x1000000, TID = globalTid % 0x1000000).
-- Ulysses facts live in ULYSSES_* tables. The format version is PRAGMA user_version at the end
-- of this file (the only place it is written); readers refuse newer files.
-- Every statement is idempotent (IF NOT EXISTS) so the writer can run the whole file.

-- ---- Nsight Systems tables -------------------------------------------------------------
CREATE TABLE IF NOT EXISTS StringIds (
    id                  INTEGER   NOT NULL   PRIMARY KEY,
    value               TEXT      NOT NULL
);
CREATE TABLE IF NOT EXISTS ThreadNames (
    nameId              INTEGER   NOT NULL,   -- REFERENCES StringIds(id)
    priority            INTEGER,
    globalTid           INTEGER
);
CREATE TABLE IF NOT EXISTS PROCESSES (
    globalPid           INTEGER,
    pid                 INTEGER,
    name                TEXT
);
CREATE TABLE IF NOT EXISTS META_DATA_EXPORT (
    name                TEXT      NOT NULL,
    value               TEXT
);
CREATE TABLE IF NOT EXISTS TARGET_INFO_GPU (
    vmId                INTEGER   NOT NULL,
    id                  INTEGER   NOT NULL,
    name                TEXT,
    busLocation         TEXT,
    isDiscrete          INTEGER,
    l2CacheSize         INTEGER,
    totalMemory         INTEGER,
    memoryBandwidth     INTEGER,
    clockRate           INTEGER,
    smCount             INTEGER,
    pwGpuId             INTEGER,
    uuid                TEXT,
    luid                INTEGER,
    chipName            TEXT,
    cuDevice            INTEGER,
    ctxswDevPath        TEXT,
    ctrlDevPath         TEXT,
    revision            INTEGER,
    nodeMask            INTEGER,
    constantMemory      INTEGER,
    maxIPC              INTEGER,
    maxRegistersPerBlock INTEGER,
    maxShmemPerBlock    INTEGER,
    maxShmemPerBlockOptin INTEGER,
    maxShmemPerSm       INTEGER,
    maxRegistersPerSm   INTEGER,
    threadsPerWarp      INTEGER,
    asyncEngines        INTEGER,
    maxWarpsPerSm       INTEGER,
    maxBlocksPerSm      INTEGER,
    maxThreadsPerBlock  INTEGER,
    maxBlockDimX        INTEGER,
    maxBlockDimY        INTEGER,
    maxBlockDimZ        INTEGER,
    maxGridDimX         INTEGER,
    maxGridDimY         INTEGER,
    maxGridDimZ         INTEGER,
    computeMajor        INTEGER,
    computeMinor        INTEGER,
    smMajor             INTEGER,
    smMinor             INTEGER
);
-- NVTX ranges: eventType 59 = push/pop range (ScopedRange), 60 = start/end range
-- (Tracer::record_range, e.g. async all-to-all measured on another thread).
-- category = the range's Phase value; text stays NULL and textId names the phase.
-- The ulysses* columns after nsys' own (format 4) are each range's Ulysses attributes, in
-- the same row: one row per range is written and read, not two. NULL in rows we did not
-- write (an nsys export's). SQL that names nsys' columns runs unchanged; the view
-- ULYSSES_RANGES below gives them format 3's table shape.
CREATE TABLE IF NOT EXISTS NVTX_EVENTS (
    start               INTEGER   NOT NULL,
    end                 INTEGER,
    eventType           INTEGER   NOT NULL,
    rangeId             INTEGER,
    category            INTEGER,
    color               INTEGER,
    text                TEXT,
    globalTid           INTEGER,
    endGlobalTid        INTEGER,
    textId              INTEGER,              -- REFERENCES StringIds(id)
    domainId            INTEGER,
    uint64Value         INTEGER,
    int64Value          INTEGER,
    doubleValue         REAL,
    uint32Value         INTEGER,
    int32Value          INTEGER,
    floatValue          REAL,
    jsonTextId          INTEGER,
    jsonText            TEXT,
    ulyssesStep         INTEGER,              -- meanings: see ULYSSES_RANGES
    ulyssesDirection    INTEGER,
    ulyssesLayer        INTEGER,
    ulyssesHeadBegin    INTEGER,
    ulyssesHeadEnd      INTEGER,
    ulyssesChunk        INTEGER,
    ulyssesBytesSent    INTEGER,
    ulyssesBytesRecv    INTEGER,
    ulyssesPgId         INTEGER,
    ulyssesSeq          INTEGER
);
CREATE TABLE IF NOT EXISTS CUPTI_ACTIVITY_KIND_KERNEL (
    start               INTEGER   NOT NULL,
    end                 INTEGER   NOT NULL,
    deviceId            INTEGER   NOT NULL,
    contextId           INTEGER   NOT NULL,
    streamId            INTEGER   NOT NULL,
    correlationId       INTEGER,
    globalPid           INTEGER,
    demangledName       INTEGER   NOT NULL,   -- REFERENCES StringIds(id)
    shortName           INTEGER   NOT NULL,   -- REFERENCES StringIds(id)
    mangledName         INTEGER,              -- REFERENCES StringIds(id)
    launchType          INTEGER,
    cacheConfig         INTEGER,
    registersPerThread  INTEGER   NOT NULL,
    gridX               INTEGER   NOT NULL,
    gridY               INTEGER   NOT NULL,
    gridZ               INTEGER   NOT NULL,
    blockX              INTEGER   NOT NULL,
    blockY              INTEGER   NOT NULL,
    blockZ              INTEGER   NOT NULL,
    staticSharedMemory  INTEGER   NOT NULL,
    dynamicSharedMemory INTEGER   NOT NULL,
    localMemoryPerThread INTEGER  NOT NULL,
    localMemoryTotal    INTEGER   NOT NULL,
    gridId              INTEGER   NOT NULL,
    sharedMemoryExecuted INTEGER,
    graphNodeId         INTEGER,
    sharedMemoryLimitConfig INTEGER
);
CREATE TABLE IF NOT EXISTS CUPTI_ACTIVITY_KIND_MEMCPY (
    start               INTEGER   NOT NULL,
    end                 INTEGER   NOT NULL,
    deviceId            INTEGER   NOT NULL,
    contextId           INTEGER   NOT NULL,
    streamId            INTEGER   NOT NULL,
    correlationId       INTEGER,
    globalPid           INTEGER,
    bytes               INTEGER   NOT NULL,
    copyKind            INTEGER   NOT NULL,
    deprecatedSrcId     INTEGER,
    srcKind             INTEGER,
    dstKind             INTEGER,
    srcDeviceId         INTEGER,
    srcContextId        INTEGER,
    dstDeviceId         INTEGER,
    dstContextId        INTEGER,
    migrationCause      INTEGER,
    graphNodeId         INTEGER,
    virtualAddress      INTEGER
);
CREATE TABLE IF NOT EXISTS CUPTI_ACTIVITY_KIND_MEMSET (
    start               INTEGER   NOT NULL,
    end                 INTEGER   NOT NULL,
    deviceId            INTEGER   NOT NULL,
    contextId           INTEGER   NOT NULL,
    streamId            INTEGER   NOT NULL,
    correlationId       INTEGER,
    globalPid           INTEGER,
    value               INTEGER   NOT NULL,
    bytes               INTEGER   NOT NULL,
    graphNodeId         INTEGER,
    memKind             INTEGER
);
CREATE TABLE IF NOT EXISTS CUPTI_ACTIVITY_KIND_RUNTIME (
    start               INTEGER   NOT NULL,
    end                 INTEGER   NOT NULL,
    eventClass          INTEGER   NOT NULL,
    globalTid           INTEGER,
    correlationId       INTEGER,
    nameId              INTEGER   NOT NULL,   -- REFERENCES StringIds(id)
    returnValue         INTEGER   NOT NULL,
    callchainId         INTEGER
);
-- Not an nsys table: CUPTI's own record (CUpti_ActivityExternalCorrelation), kept with the
-- nsys naming. Every CUDA API call made while the Tracer had an external id pushed
-- (a traced range or a Tracer::push_correlation) gets one row: correlationId (as in
-- CUPTI_ACTIVITY_KIND_KERNEL / _RUNTIME / _MEMCPY / _MEMSET) -> externalId
-- (ULYSSES_EXTERNAL_IDS). externalKind 3 = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0.
CREATE TABLE IF NOT EXISTS CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION (
    correlationId       INTEGER   NOT NULL,
    externalKind        INTEGER   NOT NULL,
    externalId          INTEGER   NOT NULL,
    globalPid           INTEGER
);

-- ---- Ulysses tables --------------------------------------------------------------------
-- One row: the run this rank belongs to.
CREATE TABLE IF NOT EXISTS ULYSSES_RUN (
    runId               TEXT,
    configJson          TEXT,                 -- resolved RunConfig (RunConfig::to_json)
    worldSize           INTEGER   NOT NULL,
    spSize              INTEGER   NOT NULL,
    dpSize              INTEGER   NOT NULL,
    clock               TEXT      NOT NULL,   -- 'CLOCK_MONOTONIC'
    createdUtc          TEXT
);
-- One row per rank in this file (one, for files the tracer writes).
CREATE TABLE IF NOT EXISTS ULYSSES_RANKS (
    rank                INTEGER   NOT NULL   PRIMARY KEY,
    spRank              INTEGER   NOT NULL,
    dpRank              INTEGER   NOT NULL,
    device              TEXT,
    hostname            TEXT,
    pid                 INTEGER,
    globalPid           INTEGER
);
-- Phase ids used by ULYSSES_RANGES.phase and NVTX_EVENTS.category.
CREATE TABLE IF NOT EXISTS ULYSSES_PHASES (
    id                  INTEGER   NOT NULL   PRIMARY KEY,
    name                TEXT      NOT NULL,
    isComm              INTEGER   NOT NULL
);
-- One row per finished step (written at end_step, in the same transaction as its ranges).
CREATE TABLE IF NOT EXISTS ULYSSES_STEPS (
    rank                INTEGER   NOT NULL,
    step                INTEGER   NOT NULL,
    start               INTEGER   NOT NULL,   -- begin_step time (ns)
    end                 INTEGER   NOT NULL,   -- end_step time (ns)
    loss                REAL,
    lr                  REAL,
    gradNorm            REAL,
    tokens              INTEGER,
    tokensPerS          REAL,
    stepMs              REAL,
    maxMemBytes         INTEGER,
    PRIMARY KEY (rank, step)
);
-- One row per NVTX_EVENTS range we wrote: eventId = NVTX_EVENTS.rowid.
-- direction: 0 none, 1 forward, 2 backward, 3 recompute. -1 = not applicable.
-- headBegin/headEnd: global head range [headBegin, headEnd). bytes exclude the self-copy.
-- pgId, seq (format 3): collective identity, the process group (0 = world, 1 + g = SP group g)
-- and the group's sequence number of the collective, equal on every member rank, so
-- (pgId, seq) joins one collective's ranges across the rank files. -1 = not a collective.
-- Formats 1-3 stored this as a table written beside NVTX_EVENTS, row for row (eventId INTEGER
-- PRIMARY KEY, every column NOT NULL); format 4 keeps the values in NVTX_EVENTS' ulysses*
-- columns and this view gives the same columns, so queries over it run on every format.
CREATE VIEW IF NOT EXISTS ULYSSES_RANGES AS
    SELECT rowid AS eventId, ulyssesStep AS step, category AS phase, ulyssesDirection AS direction,
           ulyssesLayer AS layer, ulyssesHeadBegin AS headBegin, ulyssesHeadEnd AS headEnd,
           ulyssesChunk AS chunk, ulyssesBytesSent AS bytesSent, ulyssesBytesRecv AS bytesRecv,
           ulyssesPgId AS pgId, ulyssesSeq AS seq
    FROM NVTX_EVENTS WHERE ulyssesStep IS NOT NULL;
-- What launched the GPU work tagged with an external id (written only on GPU ranks):
-- eventId = NVTX_EVENTS.rowid of the traced range that pushed it, or NULL for an
-- all-to-all issue (Tracer::push_correlation): its range is the start/end range (eventType
-- 60) of the same step with the same phase/direction/layer/heads/chunk. Kernel -> layer:
--   CUPTI_ACTIVITY_KIND_KERNEL.correlationId = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION.correlationId,
--   CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION.externalId = ULYSSES_EXTERNAL_IDS.externalId.
CREATE TABLE IF NOT EXISTS ULYSSES_EXTERNAL_IDS (
    externalId          INTEGER   NOT NULL   PRIMARY KEY,
    eventId             INTEGER,                            -- = NVTX_EVENTS.rowid, NULL: see above
    step                INTEGER   NOT NULL,
    phase               INTEGER   NOT NULL,                 -- REFERENCES ULYSSES_PHASES(id)
    direction           INTEGER   NOT NULL,
    layer               INTEGER   NOT NULL,
    headBegin           INTEGER   NOT NULL,
    headEnd             INTEGER   NOT NULL,
    chunk               INTEGER   NOT NULL
);
-- Memory samples at phase boundaries. CPU ranks: allocated = reserved = RSS, peak = VmHWM.
CREATE TABLE IF NOT EXISTS ULYSSES_MEMORY (
    rank                INTEGER   NOT NULL,
    timestamp           INTEGER   NOT NULL,
    step                INTEGER   NOT NULL,
    labelId             INTEGER   NOT NULL,   -- REFERENCES StringIds(id)
    allocated           INTEGER   NOT NULL,
    reserved            INTEGER   NOT NULL,
    peak                INTEGER   NOT NULL
);
-- This rank's trace clock against rank 0's (format 3), measured by ping-pong through the
-- c10d store after the process groups are up (kind 'start') and again at the end ('close'):
-- offsetNs = this clock - rank 0's clock, |error| <= errorNs (half the best round trip of
-- `rounds`), measuredAt on this rank's clock. Aligned time = timestamp - offset (the loader
-- interpolates linearly between 'start' and 'close' for drift).
CREATE TABLE IF NOT EXISTS ULYSSES_CLOCK (
    rank                INTEGER   NOT NULL,
    kind                TEXT      NOT NULL,
    offsetNs            INTEGER   NOT NULL,
    errorNs             INTEGER   NOT NULL,
    rttNs               INTEGER,
    rounds              INTEGER,
    measuredAt          INTEGER   NOT NULL
);
-- Live memory by category (memory_categories.hpp), bytes: at both edges of every range pushed
-- on a thread (edge 0 begin, 1 end; phase and layer of the range), at each step's peak (edge 2,
-- taken when it happened), the planner's predicted peak (edge 3, step -1, rank 0 only) and the
-- planner's curve (edges 4 begin, 5 end of the model's ranges in its dry run, in order; step -1).
-- CPU ranks count tensor storage through the counting CPU allocator. Absent in older traces.
CREATE TABLE IF NOT EXISTS ULYSSES_MEMORY_CATEGORIES (
    rank                INTEGER   NOT NULL,
    timestamp           INTEGER   NOT NULL,
    step                INTEGER   NOT NULL,
    edge                INTEGER   NOT NULL,
    phase               INTEGER   NOT NULL,
    layer               INTEGER   NOT NULL,
    parameters          INTEGER   NOT NULL,
    gradients           INTEGER   NOT NULL,
    optimizer           INTEGER   NOT NULL,
    activations         INTEGER   NOT NULL,
    logits              INTEGER   NOT NULL,
    communication       INTEGER   NOT NULL,
    other               INTEGER   NOT NULL
);
-- data.kind = "documents": the documents each rank's sequence shard holds, one row per (step,
-- sequence, piece, document) the piece overlaps (document_shard.hpp). Positions are token indices
-- of the packed sequence: the rank's piece is [shardBegin, shardEnd) (piece 0, or 0 and 1 with a
-- ring: the pieces of seq_shard_ranges), the document's part in the sequence is [begin, end), the
-- rank holds their intersection. document: index in the prepared folder (-1: padding); docTokens:
-- its whole length; docOffset: where in the document the sequence's part starts (a document longer
-- than seq_length is cut). packed: the packed sequence (documents.hpp). Absent in older traces.
CREATE TABLE IF NOT EXISTS ULYSSES_DOCUMENTS (
    rank                INTEGER   NOT NULL,
    step                INTEGER   NOT NULL,
    sequence            INTEGER   NOT NULL,
    packed              INTEGER   NOT NULL,
    piece               INTEGER   NOT NULL,
    shardBegin          INTEGER   NOT NULL,
    shardEnd            INTEGER   NOT NULL,
    document            INTEGER   NOT NULL,
    docTokens           INTEGER   NOT NULL,
    docOffset           INTEGER   NOT NULL,
    begin               INTEGER   NOT NULL,
    end                 INTEGER   NOT NULL
);
-- The named tensors or groups of tensors alive at each step's peak (the edge-2 row of
-- ULYSSES_MEMORY_CATEGORIES of the same rank and step; CPU ranks; docs/LONG_SEQUENCES.md "What is
-- alive at the peak"): ord 0 the largest; name as the engine names it, category as above, dtype
-- and shape of the group's largest tensor ('' unknown), its live bytes and blocks. The largest 63
-- groups, then one row for the rest, so a step's rows add up to its peak. Absent in older traces.
CREATE TABLE IF NOT EXISTS ULYSSES_PEAK_TENSORS (
    rank                INTEGER   NOT NULL,
    step                INTEGER   NOT NULL,
    ord                 INTEGER   NOT NULL,
    name                TEXT      NOT NULL,
    category            TEXT      NOT NULL,
    dtype               TEXT      NOT NULL,
    shape               TEXT      NOT NULL,
    bytes               INTEGER   NOT NULL,
    blocks              INTEGER   NOT NULL
);
-- Free-form run metrics (Tracer::set_metric); last value wins.
CREATE TABLE IF NOT EXISTS ULYSSES_METRICS (
    name                TEXT      NOT NULL   PRIMARY KEY,
    value               REAL
);

-- 2: CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, ULYSSES_EXTERNAL_IDS.
-- 3: ULYSSES_RANGES.pgId / seq (collective identity), ULYSSES_CLOCK (clock offsets to rank 0).
-- 4: a range's Ulysses attributes in NVTX_EVENTS' ulysses* columns (one row per range);
--    ULYSSES_RANGES is a view over them.
PRAGMA user_version = 4;
