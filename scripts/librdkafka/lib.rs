// Empty: this package exists only to fetch the librdkafka source (see Cargo.toml).
