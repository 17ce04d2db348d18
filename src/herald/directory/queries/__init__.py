"""The directory stage's SQL, one module a concept: `records` (people, roles, groups,
memberships, guardianships), `erasure` (erasing a person), `readback` (what an import compares
against). Long statements are in directory.sql."""
