-- The session history: one row per pod (sessions) with the first record of
-- each event kind folded in, and the records themselves (session_events).
-- One file for SQLite and PostgreSQL: portable types only, timestamps are
-- unix milliseconds (BIGINT), text columns are '' rather than NULL when
-- unknown so that equality filters need no NULL cases.

-- +goose Up
CREATE TABLE sessions (
    uid                    TEXT    NOT NULL PRIMARY KEY,
    user_name              TEXT    NOT NULL,
    server                 TEXT    NOT NULL DEFAULT '',
    namespace              TEXT    NOT NULL DEFAULT '',
    pod                    TEXT    NOT NULL DEFAULT '',
    profile                TEXT    NOT NULL DEFAULT '',
    image                  TEXT    NOT NULL DEFAULT '',
    course                 TEXT    NOT NULL DEFAULT '',
    gpu_class              TEXT    NOT NULL DEFAULT '',
    reservation            TEXT    NOT NULL DEFAULT '',
    reservation_kind       TEXT    NOT NULL DEFAULT '',
    -- The earlier of requested_at and created_at; until either is known,
    -- the earliest record's time.
    started_at             BIGINT  NOT NULL,
    requested_at           BIGINT,
    requested_by_kind      TEXT    NOT NULL DEFAULT '',
    requested_by_name      TEXT    NOT NULL DEFAULT '',
    created_at             BIGINT,
    scheduled_at           BIGINT,
    node                   TEXT    NOT NULL DEFAULT '',
    ready_at               BIGINT,
    stop_requested_at      BIGINT,
    stop_requested_by_kind TEXT    NOT NULL DEFAULT '',
    stop_requested_by_name TEXT    NOT NULL DEFAULT '',
    ended_at               BIGINT,
    stopper                TEXT    NOT NULL DEFAULT '',
    end_phase              TEXT    NOT NULL DEFAULT '',
    end_reason             TEXT    NOT NULL DEFAULT '',
    end_message            TEXT    NOT NULL DEFAULT '',
    end_container_reason   TEXT    NOT NULL DEFAULT '',
    end_exit_code          INTEGER,
    updated_at             BIGINT  NOT NULL
);

-- Lists are ordered by (started_at, uid) descending: this serves the
-- unfiltered list, the time window (started_at < until) and the keyset.
CREATE INDEX sessions_started ON sessions (started_at, uid);
-- A user's sessions, and Last(user, server).
CREATE INDEX sessions_user ON sessions (user_name, server, started_at);
CREATE INDEX sessions_course ON sessions (course, started_at);
CREATE INDEX sessions_class ON sessions (gpu_class, started_at);
-- The reason filter is stopper OR end_reason OR end_container_reason,
-- case-insensitive: one index per branch (stoppers are lower case).
CREATE INDEX sessions_stopper ON sessions (stopper, started_at);
CREATE INDEX sessions_end_reason ON sessions (lower(end_reason));
CREATE INDEX sessions_container_reason ON sessions (lower(end_container_reason));
-- Running sessions, newest first: a small index, as few sessions run.
CREATE INDEX sessions_running ON sessions (started_at, uid) WHERE ended_at IS NULL;
-- EndedByDay (covering: the end and its stopper are all it reads when
-- unfiltered) and Purge. Partial, so that the planner takes the index
-- above, not this one and a sort, for running sessions.
CREATE INDEX sessions_ended ON sessions (ended_at, stopper) WHERE ended_at IS NOT NULL;

CREATE TABLE session_events (
    uid    TEXT   NOT NULL REFERENCES sessions (uid) ON DELETE CASCADE,
    kind   TEXT   NOT NULL,
    at     BIGINT NOT NULL,
    -- JSON: the actor, the node, or the stopper and the end's facts.
    detail TEXT   NOT NULL DEFAULT '{}',
    PRIMARY KEY (uid, kind)
);

-- +goose Down
DROP TABLE session_events;
DROP TABLE sessions;
