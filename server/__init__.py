"""mtawindows.server: the window engine (Log MTA, Amortized MTA), monoids, policies and storage."""
