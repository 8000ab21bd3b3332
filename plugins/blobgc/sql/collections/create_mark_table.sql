-- A collection's mark state, in blobgc's own schema: the ids found unused, and since when. Typed like the
-- collection's id, so marking and sweeping walk it by id ranges on its primary key.
CREATE TABLE IF NOT EXISTS {marks} (
    id            {type} PRIMARY KEY,
    unused_since  timestamptz NOT NULL DEFAULT now()
)
