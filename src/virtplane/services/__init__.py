"""What the API calls: admission checks and the host maintenance service.

Services read the store and the cache and write resources' spec; they raise domain errors
(``domain.errors``) and never speak HTTP. They may use the controllers' read helpers, but
admission, which every API write goes through, imports no controller.
"""
