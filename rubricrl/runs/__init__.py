"""Run folders: resumable output folders, their provenance and manifests, shards and merges, publishing, and the
lifecycle the training commands share."""
