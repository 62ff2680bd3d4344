"""The API's routers, one per area (health, search, documents, admin); each endpoint calls the library."""
