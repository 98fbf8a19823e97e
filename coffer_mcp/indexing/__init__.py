"""From files to index rows: chunking, the one reindex routine, embedding, re-conversion, verification."""
