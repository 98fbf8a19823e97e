"""A small mixed corpus for comparing keyword ranking between index backends.

Short English passages of varied length and term frequency, a few Chinese ones (indexed as
bigrams), and one with Devanagari (whose words FTS5 splits at vowel signs), spread over two
knowledge bases; and queries that exercise stemming, stopwords, AND and OR.
"""

from __future__ import annotations

ENGLISH = [
    "PostgreSQL is a relational database server with transactions, replication and backups.",
    "SQLite is an embedded database: the whole database lives in one file on disk.",
    "A full-text index maps every term to the documents that contain it, like the index of a book.",
    "BM25 ranks documents by term frequency, inverse document frequency and document length.",
    "Vector search finds the nearest neighbours of a query embedding in a high-dimensional space.",
    "HNSW builds a navigable small-world graph so that approximate nearest neighbour search is fast.",
    "Running two servers against one database needs locks that work across machines.",
    "The server runs migrations when it starts; a lock keeps two servers from migrating at once.",
    "Backups of the database are taken nightly and restored weekly to test the restore procedure.",
    "Stemming reduces running, runs and ran to a common stem so that searches match word forms.",
    "Stopwords such as the, of and to are dropped from queries because they match almost everything.",
    "A knowledge base stores documents as Markdown files; the index is derived from the files.",
    "Chunking splits each document into passages of a few hundred tokens with a small overlap.",
    "Hybrid search fuses keyword and vector rankings with reciprocal rank fusion.",
    "Reciprocal rank fusion adds one over sixty plus the rank of each result in each list.",
    "Embedding models turn text into vectors; cosine similarity compares two vectors.",
    "The database index is rebuilt from the files when the schema changes or the index is damaged.",
    "Errors carry a code and a hint: the hint says what the caller can do about the failure.",
    "Connection failures, wrong passwords and missing extensions must produce clear errors.",
    "The search index search index search index repeats its terms to raise their frequency.",
    "Documents converted from PDF, Word and HTML keep their headings as the chunk heading path.",
    "Indexing a document writes its chunks, their postings and, for vector knowledge bases, vectors.",
    "Advisory locks in PostgreSQL coordinate processes without locking any table rows.",
    "Replication copies the write-ahead log to standby servers that can answer read queries.",
    "A query planner chooses between index scans, bitmap scans and sequential scans.",
    "Text search in a relational database usually means tsvector, tsquery and a GIN index.",
    "Ranking quality is measured with nDCG at ten on a labelled retrieval benchmark such as SciFact.",
    "Cats and dogs are not databases, but this passage mentions servers once to vary the statistics.",
    "Restoring a backup on another server is the only proof that the backup works.",
    "Searching, searched, searches and searcher all stem to search under the Porter stemmer.",
]

CHINESE = [
    "向量检索通过嵌入模型把文本变成向量，再用近邻搜索找到最相似的段落。",
    "全文检索为每个词建立倒排索引，中文按双字切分后也能用 BM25 排序。",
    "数据库服务器需要定期备份，恢复测试证明备份可用。",
    "近邻搜索的图索引叫 HNSW，查询时沿着图走向更近的节点。",
    "知识库把文档保存为 Markdown 文件，索引可以从文件重建。",
]

OTHER = [
    "हिन्दी भाषा में खोज: the Devanagari words split at vowel signs, हिन्दी twice.",
    "Ærøskøbing, naïve façades and the Straße: diacritics fold away, ø and ß do not.",
]

QUERIES = [
    "database",
    "database server",
    "search index",
    "running servers",
    "backup restore",
    "nearest neighbour search",
    "the",
    "to be or not to be",
    "rank fusion",
    "locks across machines",
    "stemming searches",
    "errors hints failures",
    "PostgreSQL replication",
    "vectors cosine",
    "向量检索",
    "近邻搜索",
    "备份",
    "索引 index",
    "检",
    "हिन्दी",
    "naive facade strasse",
    "aerøskøbing ærøskøbing",
    "cats dogs databases",
    "zebra",
]


def passages() -> list[tuple[str, str, str]]:
    """``(knowledge base, document id, text)``: two passages per document, two knowledge bases."""
    texts = ENGLISH + CHINESE + OTHER
    found = []
    for i, text in enumerate(texts):
        kb = "alpha" if i % 3 else "beta"
        found.append((kb, f"doc-{i // 2:02d}-{kb}", text))
    return found
