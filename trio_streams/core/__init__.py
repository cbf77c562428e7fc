"""The runtime core: the app, subscriptions, dispatch and the kit transports build on."""
