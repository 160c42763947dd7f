//! The configuration file model (SPEC §13): raw TOML in, validated typed config out.
