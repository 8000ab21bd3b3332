-- Seed 001: a photo's grace counts from the moment it became unbound, whoever unbound it. ON DELETE SET
-- NULL on app.image.offer_id unbinds without touching last_update; this trigger stamps it.
CREATE FUNCTION app.stamp_image_unbound() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.offer_id IS NULL AND OLD.offer_id IS NOT NULL THEN
        NEW.last_update := now();
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER image_unbound BEFORE UPDATE OF offer_id ON app.image
FOR EACH ROW EXECUTE FUNCTION app.stamp_image_unbound();
