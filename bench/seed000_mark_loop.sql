-- Seed 000's marking loop, verbatim from seeds/000_6ffd3cf1afc7ccb0.txt (the benchmark's baseline).
DO $$
DECLARE
v_blob "Blob"%ROWTYPE;
v_blob_cursor CURSOR FOR SELECT * FROM "Blob";
BEGIN
-- Open the cursor to iterate through all blobs
OPEN v_blob_cursor;
LOOP
-- Fetch next blob record
FETCH v_blob_cursor INTO v_blob;
-- Exit loop if no more blobs
EXIT WHEN NOT FOUND;
BEGIN
-- Try to delete the record
DELETE FROM "Blob" WHERE id = v_blob.id;
-- If successful, insert the record back and mark unused as TRUE
INSERT INTO "Blob" ("id", "filename", "mimetype", "unused", "updatedAt", "createdAt")
VALUES (
v_blob."id", v_blob."filename", v_blob."mimetype", TRUE,
CASE
WHEN v_blob."unused" = FALSE THEN now()
WHEN v_blob."unused" = TRUE THEN v_blob."updatedAt"
END,
v_blob."createdAt"
);
EXCEPTION WHEN foreign_key_violation THEN
-- If DELETE fails due to foreign key violation, set the unused flag to FALSE
UPDATE "public"."Blob" b
SET "updatedAt" = CASE
WHEN "unused" = TRUE THEN now()
WHEN "unused" = FALSE THEN b."updatedAt"
END,
"unused" = FALSE
WHERE id = v_blob.id;
END;
END LOOP;
-- Close the cursor
CLOSE v_blob_cursor;
END;
$$;
