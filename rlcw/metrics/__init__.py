"""Pure maths over text and numbers: no model code is imported here."""
