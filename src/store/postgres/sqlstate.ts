/** PostgreSQL SQLSTATE codes oncely branches on, named once. */
export const UNIQUE_VIOLATION = '23505';
export const SERIALIZATION_FAILURE = '40001';
export const DEADLOCK_DETECTED = '40P01';
export const LOCK_NOT_AVAILABLE = '55P03';
export const UNDEFINED_TABLE = '42P01';
export const DUPLICATE_TABLE = '42P07';
export const QUERY_CANCELED = '57014';
export const FEATURE_NOT_SUPPORTED = '0A000';
