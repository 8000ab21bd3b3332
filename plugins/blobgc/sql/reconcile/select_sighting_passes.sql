-- A run's pass of sightings (NULL for a dry run, which is none) and the pass before it (for a dry run, the latest).
SELECT this.pass,
       (SELECT max(p.pass) FROM blobgc.reconcile_pass AS p WHERE this.pass IS NULL OR p.pass < this.pass)
FROM (SELECT (SELECT pass FROM blobgc.reconcile_pass WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s) AS pass) AS this
