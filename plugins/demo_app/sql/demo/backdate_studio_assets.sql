-- Make studio assets old the honest way: their rows were uploaded `age` ago.
UPDATE studio.asset SET uploaded_at = now() - %(age)s::interval WHERE id = ANY(%(ids)s::uuid[])
