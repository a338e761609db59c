"""Getting office into a database: the two install paths, upgrades from every
released version, a hostile install, mixed client/schema versions, and the
embedded PostgreSQL."""
