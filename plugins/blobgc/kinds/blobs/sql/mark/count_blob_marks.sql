-- Dry run of update_blob_marks: count the flips one key range would make, changing nothing.
WITH marks AS ({marks})
SELECT count(*) FILTER (WHERE flip_unused AND NOT unused) AS would_become_unused,
       count(*) FILTER (WHERE flip_unused AND unused)     AS would_become_used,
       count(*) FILTER (WHERE flip_visibility)            AS would_change_visibility
FROM marks
