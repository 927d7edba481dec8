import os

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
