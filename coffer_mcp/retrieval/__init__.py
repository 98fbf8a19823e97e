"""Finding passages: ranked search over the index (keyword, vector, their fusion) and grep over the files."""
