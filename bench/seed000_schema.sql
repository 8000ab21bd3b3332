-- Seed 000's own tables (Prisma names, quoted), so its marking loop can run verbatim as the baseline.
-- The seed's model says onDelete: Restrict, but PostgreSQL's ON DELETE RESTRICT raises restrict_violation
-- (23001), which the seed's handler (EXCEPTION WHEN foreign_key_violation, 23503) does not catch: the loop
-- would abort on the first referenced blob. NO ACTION (the default) raises 23503, so the loop runs as written.
CREATE TYPE "VisibilityType" AS ENUM ('PRIVATE', 'PUBLIC');
CREATE TABLE "Blob" (
    "id" varchar(11) PRIMARY KEY,
    "filename" varchar(255) NOT NULL,
    "mimetype" varchar(255) NOT NULL,
    "visibility" "VisibilityType" NOT NULL DEFAULT 'PRIVATE',
    "unused" boolean NOT NULL DEFAULT false,
    "updatedAt" timestamp(3) NOT NULL DEFAULT now(),
    "createdAt" timestamp(3) NOT NULL DEFAULT now()
);
CREATE TABLE "Post" ("id" text PRIMARY KEY);
CREATE TABLE "BlobAttachment" (
    "id" serial PRIMARY KEY,
    "blobID" varchar(11) NOT NULL REFERENCES "Blob"("id") ON UPDATE CASCADE ON DELETE NO ACTION,
    "postID" text REFERENCES "Post"("id") ON UPDATE CASCADE ON DELETE CASCADE,
    UNIQUE ("postID", "blobID")
);
CREATE INDEX ON "BlobAttachment" ("blobID");
CREATE TABLE "PageUsingBlob" (
    "blobID" varchar(11) NOT NULL REFERENCES "Blob"("id") ON DELETE NO ACTION,
    "url" text NOT NULL,
    "inUse" boolean NOT NULL DEFAULT true,
    "updatedAt" timestamp(3) NOT NULL DEFAULT now(),
    PRIMARY KEY ("blobID", "url")
);
