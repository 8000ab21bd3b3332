"""The demo application: the code the seeds' applications would own (uploads, writers, the media store, the
crawler's downloader and resizer) and the demo loader. It stands in for the user's own application: blobgc
never imports it; it may use blobgc's core (key layouts, the lock protocols, upload intents)."""
