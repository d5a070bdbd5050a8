"""The package version: the daemon's (include/feedfs/options.h FEEDFS_VERSION)."""
__version__ = "0.1.0"
