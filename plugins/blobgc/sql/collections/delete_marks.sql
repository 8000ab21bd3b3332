-- Ids found referenced at delete time are in use again: forget that they were unused.
DELETE FROM {marks} WHERE id = ANY(%(ids)s::text[]::{type}[])
