-- Templates that carry their own packages: a version's recipe (image, JSON), the key of the
-- read-only layer it builds (layer; shared by every version with the same base and recipe),
-- and its build's state (build, JSON).
ALTER TABLE templates ADD COLUMN image TEXT;
ALTER TABLE templates ADD COLUMN layer TEXT;
ALTER TABLE templates ADD COLUMN build TEXT;
CREATE INDEX templates_layer ON templates (layer);
-- A sandbox's template layer (the key), which it runs on over its image.
ALTER TABLE sandboxes ADD COLUMN layer TEXT;
