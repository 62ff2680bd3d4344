SELECT key, value FROM meta;
