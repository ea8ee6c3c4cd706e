"""One APIRouter per resource; ``service.main`` includes them all."""
