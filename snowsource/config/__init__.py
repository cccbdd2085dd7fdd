"""Configuration: YAML file + environment + secret files, validated once into frozen settings."""
