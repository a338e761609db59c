"""What a user sees: the dashboard (``officectl ui``) and ``officectl demo``."""
